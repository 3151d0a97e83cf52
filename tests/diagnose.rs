//! `accelready diagnose` end to end: the built binary on kubectl JSON
//! fixtures, with a fixed `--now`, in text and JSON.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

/// Five minutes after the incident node's AcceleratedHardwareReady went False.
const NOW: &str = "2025-06-10T03:05:00Z";

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/diagnose")
        .join(name)
}

fn diagnose(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_accelready"))
        .arg("diagnose")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run accelready")
}

fn text(fixture_name: &str, extra: &[&str]) -> (i32, String) {
    let path = fixture(fixture_name);
    let mut args = vec![path.to_str().unwrap()];
    if !extra.contains(&"--now") {
        args.extend(["--now", NOW]);
    }
    args.extend_from_slice(extra);
    let output = diagnose(&args);
    let stdout = String::from_utf8(output.stdout).unwrap();
    (output.status.code().unwrap(), stdout)
}

fn json(fixture_name: &str, extra: &[&str]) -> (i32, Value) {
    let mut args = vec!["--json"];
    args.extend_from_slice(extra);
    let (code, stdout) = text(fixture_name, &args);
    let value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    (code, value)
}

fn verdicts(forecast: &Value) -> Vec<(String, String)> {
    forecast["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["name"].as_str().unwrap().to_owned(),
                n["verdict"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn incident_node_is_replaced_ten_minutes_after_the_condition_flips() {
    let (code, out) = text("incident-node.json", &["--karpenter", "v1.4.0"]);
    assert_eq!(code, 3, "{out}");
    assert!(
        out.contains("will-be-replaced at 2025-06-10T03:10:00Z (5m left)"),
        "{out}"
    );
    assert!(
        out.contains("AcceleratedHardwareReady=False since 2025-06-10T03:00:00Z, reason DCGMError"),
        "{out}"
    );
    assert!(
        out.contains("assumes the rest of its pool is healthy"),
        "{out}"
    );
    assert!(out.contains("DCGM-3-era client"), "{out}");
    assert!(out.contains("unversioned name 'libdcgm.so'"), "{out}");
    assert!(
        out.contains("1. Upgrade the EKS node monitoring agent first"),
        "{out}"
    );
    assert!(out.contains("No bundle can fix the agent you run"), "{out}");
    assert!(out.contains("Assumption: no agent given"), "{out}");
    assert!(
        out.contains("identifies a DCGM-3-era agent (before v1.6.0)"),
        "{out}"
    );
    // What used to be advised and cannot work for this agent.
    assert!(
        !out.contains("so that libdcgm resolves inside the agent's process"),
        "{out}"
    );
    assert!(!out.contains("run your own DaemonSet"), "{out}");
    assert!(out.contains("ship the driver but no DCGM"), "{out}");
    assert!(out.contains("dcgm-server DaemonSet"), "{out}");
    assert!(out.contains("`accelready boot`"), "{out}");
    assert!(
        out.contains("nodeAgent.monitors.nvidia.enabled: false"),
        "{out}"
    );
    assert!(out.contains("Last resort: turn node repair off"), "{out}");

    let (code, forecast) = json("incident-node.json", &["--karpenter", "1.4.0"]);
    assert_eq!(code, 3);
    assert_eq!(forecast["karpenter"], "v1.4.0");
    assert_eq!(forecast["scope"], "single-node");
    assert_eq!(forecast["check_order"], "pool-first");
    assert_eq!(forecast["will_be_replaced"], 1);
    let node = &forecast["nodes"][0];
    assert_eq!(node["verdict"], "will-be-replaced");
    assert_eq!(node["nodepool"], "gpu");
    assert_eq!(node["group"], Value::Null);
    let trigger = &node["trigger"];
    assert_eq!(trigger["type"], "AcceleratedHardwareReady");
    assert_eq!(trigger["status"], "False");
    assert_eq!(trigger["reason"], "DCGMError");
    assert_eq!(trigger["since"], "2025-06-10T03:00:00Z");
    assert_eq!(trigger["toleration_seconds"], 600);
    assert_eq!(trigger["termination_time"], "2025-06-10T03:10:00Z");
    assert_eq!(trigger["seconds_left"], 300);
    assert_eq!(trigger["overdue"], false);
    assert_eq!(trigger["advice"]["key"], "dcgm-library-not-found");
    assert_eq!(trigger["advice"]["fixes"].as_array().unwrap().len(), 4);
    assert_eq!(forecast["agent"]["source"], "assumed");
    assert_eq!(forecast["agent"]["version"], "v1.7.2");
    assert!(forecast["agent"]["assumption"].is_string());
    assert_eq!(node["gpu_monitored"], true);
    assert_eq!(node["dcgm_server"], Value::Null);
}

#[test]
fn past_the_termination_time_the_node_is_overdue() {
    let (code, out) = text("incident-node.json", &["--now", "2025-06-10T03:13:00Z"]);
    assert_eq!(code, 3, "{out}");
    assert!(
        out.contains("overdue since 2025-06-10T03:10:00Z (overdue by 3m)"),
        "{out}"
    );
    let (_, forecast) = json("incident-node.json", &["--now", "2025-06-10T03:13:00Z"]);
    assert_eq!(forecast["nodes"][0]["trigger"]["seconds_left"], -180);
    assert_eq!(forecast["nodes"][0]["trigger"]["overdue"], true);
}

#[test]
fn pool_of_two_both_unhealthy_is_blocked_with_v1_4_wording() {
    let events = fixture("pool-of-2-events.json");
    let (code, out) = text(
        "pool-of-2-unhealthy.json",
        &[
            "--karpenter",
            "v1.4.0",
            "--events",
            events.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("0 of 2 node(s) will be replaced"), "{out}");
    assert!(
        out.contains(
            "2 of 2 nodes unhealthy in nodepool gpu; limit is 20% rounded up = 1 -> repair blocked"
        ),
        "{out}"
    );
    assert!(
        out.contains("checks the pool before the node's own conditions"),
        "{out}"
    );
    assert!(out.contains("does not retry on a timer"), "{out}");
    assert!(
        out.contains(
            "NodeRepairBlocked [karpenter] (x4): more than 20% nodes are unhealthy in the nodepool"
        ),
        "{out}"
    );
    // NodeClaim events do not belong to a node's history.
    assert_eq!(
        out.matches("NodeRepairBlocked [karpenter]").count(),
        2,
        "{out}"
    );

    let (code, forecast) = json("pool-of-2-unhealthy.json", &["--karpenter", "v1.4.0"]);
    assert_eq!(code, 0);
    assert_eq!(forecast["scope"], "node-list");
    for node in forecast["nodes"].as_array().unwrap() {
        assert_eq!(node["verdict"], "repair-blocked");
        let group = &node["group"];
        assert_eq!(group["scope"], "nodepool gpu");
        assert_eq!(
            (group["nodes"].as_u64(), group["unhealthy"].as_u64()),
            (Some(2), Some(2))
        );
        assert_eq!(group["max_unhealthy"], 1);
        assert_eq!(group["blocked"], true);
    }
}

#[test]
fn newer_karpenter_checks_the_node_first_and_requeues() {
    let (_, v16) = text("pool-of-2-unhealthy.json", &["--karpenter", "v1.6.0"]);
    assert!(
        v16.contains("checks the node's own conditions first"),
        "{v16}"
    );
    assert!(v16.contains("does not retry on a timer"), "{v16}");
    let (_, v17) = text("pool-of-2-unhealthy.json", &[]);
    assert!(v17.contains("Karpenter v1.7.0 node repair on"), "{v17}");
    assert!(v17.contains("retries every 300s while blocked"), "{v17}");
}

#[test]
fn pool_of_six_with_one_unhealthy_is_repaired() {
    let (code, out) = text("pool-of-6-one-unhealthy.json", &["--karpenter", "v1.4.0"]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("1 of 6 node(s) will be replaced"), "{out}");
    assert!(out.contains("1 of 6 nodes unhealthy in nodepool gpu; limit is 20% rounded up = 2 -> within the limit"), "{out}");
    let (code, forecast) = json("pool-of-6-one-unhealthy.json", &["--karpenter", "v1.4.0"]);
    assert_eq!(code, 3);
    let verdicts = verdicts(&forecast);
    let replaced: Vec<_> = verdicts
        .iter()
        .filter(|(_, v)| v == "will-be-replaced")
        .collect();
    assert_eq!(replaced.len(), 1, "{verdicts:?}");
    assert_eq!(replaced[0].0, "ip-10-0-1-22.us-west-2.compute.internal");
    assert_eq!(verdicts.iter().filter(|(_, v)| v == "healthy").count(), 5);
}

#[test]
fn a_node_without_an_ec2nodeclass_is_not_managed() {
    let (code, out) = text("not-karpenter.json", &[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("not-managed: not a Karpenter node"), "{out}");
    // The condition and its cause are still explained.
    assert!(out.contains("AcceleratedHardwareReady=False"), "{out}");
    assert!(out.contains("cause (dcgm-library-not-found)"), "{out}");
    let (_, forecast) = json("not-karpenter.json", &[]);
    assert_eq!(forecast["nodes"][0]["verdict"], "not-managed");
    assert_eq!(forecast["will_be_replaced"], 0);
}

#[test]
fn ready_unknown_is_replaced_after_thirty_minutes() {
    let (code, out) = text("ready-unknown.json", &[]);
    assert_eq!(code, 3, "{out}");
    assert!(
        out.contains("will-be-replaced at 2025-06-10T03:30:00Z (25m left)"),
        "{out}"
    );
    assert!(
        out.contains("Ready=Unknown since 2025-06-10T03:00:00Z, reason NodeStatusUnknown"),
        "{out}"
    );
    assert!(out.contains("OOM-killed"), "{out}");
    assert!(out.contains("11 * max-pods + 255 Mi"), "{out}");
    assert!(out.contains("at least 4 GiB"), "{out}");
    let (_, forecast) = json("ready-unknown.json", &[]);
    let trigger = &forecast["nodes"][0]["trigger"];
    assert_eq!(trigger["type"], "Ready");
    assert_eq!(trigger["status"], "Unknown");
    assert_eq!(trigger["toleration_seconds"], 1800);
    assert_eq!(trigger["advice"]["key"], "kubelet-not-reporting");
}

#[test]
fn ready_unknown_is_not_a_policy_before_v1_2() {
    let (code, out) = text("ready-unknown.json", &["--karpenter", "v1.1.0"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(": healthy"), "{out}");
}

#[test]
fn a_healthy_node_is_healthy() {
    let (code, out) = text("healthy-node.json", &[]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("ip-10-0-1-24.us-west-2.compute.internal: healthy"),
        "{out}"
    );
    assert!(!out.contains("cause"), "{out}");
    let (_, forecast) = json("healthy-node.json", &[]);
    assert_eq!(forecast["nodes"][0]["verdict"], "healthy");
    assert_eq!(forecast["nodes"][0]["trigger"], Value::Null);
    assert_eq!(forecast["nodes"][0]["unhealthy"], Value::Array(Vec::new()));
}

#[test]
fn with_node_repair_off_nothing_happens_but_the_cause_is_shown() {
    let (code, out) = text("incident-node.json", &["--node-repair", "off"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("node repair off"), "{out}");
    assert!(
        out.contains("repair-disabled: node repair is off, nothing will happen to this node"),
        "{out}"
    );
    assert!(out.contains("AcceleratedHardwareReady=False"), "{out}");
    assert!(out.contains("cause (dcgm-library-not-found)"), "{out}");
    let (code, forecast) = json("incident-node.json", &["--node-repair", "off"]);
    assert_eq!(code, 0);
    assert_eq!(forecast["node_repair"], false);
    assert_eq!(forecast["nodes"][0]["verdict"], "repair-disabled");
}

#[test]
fn stdin_is_read_for_dash_and_for_no_argument() {
    let input = std::fs::read(fixture("incident-node.json")).unwrap();
    for args in [vec!["-", "--now", NOW], vec!["--now", NOW]] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_accelready"))
            .arg("diagnose")
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(&input).unwrap();
        let output = child.wait_with_output().unwrap();
        assert_eq!(output.status.code(), Some(3), "{args:?}");
        assert!(String::from_utf8_lossy(&output.stdout).contains("will-be-replaced"));
    }
}

#[test]
fn bad_input_is_named_and_exits_2() {
    let cases: [(&str, &[&str], &str); 6] = [
        ("malformed.json", &[], "malformed.json is not valid JSON"),
        ("list-with-pod.json", &[], "list-with-pod.json: item 3 has kind 'Pod', expected Node"),
        (
            "no-transition-time.json",
            &[],
            "node 'ip-10-0-1-23.us-west-2.compute.internal': condition 'AcceleratedHardwareReady' has no lastTransitionTime",
        ),
        ("pool-of-2-events.json", &[], "item 0 has kind 'Event', expected Node"),
        ("incident-node.json", &["--karpenter", "v1.0.0"], "modelled: v1.1.0, v1.2.0, v1.6.0, v1.7.0"),
        ("incident-node.json", &["--karpenter", "latest"], "invalid Karpenter version 'latest'"),
    ];
    for (name, extra, message) in cases {
        let path = fixture(name);
        let mut args = vec![path.to_str().unwrap(), "--now", NOW];
        args.extend_from_slice(extra);
        let output = diagnose(&args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{name}: {stderr}");
        assert!(stderr.contains(message), "{name}: {stderr}");
        assert!(output.stdout.is_empty(), "{name}: results only on success");
    }
    let output = diagnose(&["/nonexistent/nodes.json"]);
    assert_eq!(output.status.code(), Some(2));
    let output = diagnose(&[
        fixture("incident-node.json").to_str().unwrap(),
        "--now",
        "10 minutes ago",
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr)
        .contains("--now '10 minutes ago' is not an RFC 3339 time"));
}

// --- the agent ---

fn fixture_arg(name: &str) -> String {
    fixture(name).to_str().unwrap().to_owned()
}

#[test]
fn every_agent_row_is_reachable_from_diagnose() {
    use accelready::repair::agent::{DcgmClient, AGENTS};
    assert_eq!(AGENTS.len(), 5, "a new row needs its expectations here");
    for row in AGENTS {
        let version = row.since.to_string();
        let (code, forecast) = json("arm64-no-engine-node.json", &["--agent-version", &version]);
        assert_eq!(code, 3, "{version}");
        let agent = &forecast["agent"];
        assert_eq!(agent["version"], version.as_str());
        assert_eq!(agent["source"], "flag");
        assert_eq!(agent["assumption"], Value::Null);
        assert_eq!(agent["model"]["since"], version.as_str());
        assert_eq!(
            agent["model"]["monitors_arm64"], row.monitors_arm64,
            "{version}"
        );
        assert_eq!(agent["model"]["grace"], 60, "{version}");
        assert_eq!(agent["range"], row.range().as_str());
        let node = &forecast["nodes"][0];
        assert_eq!(node["gpu_monitored"], row.monitors_arm64, "{version}");
        let advice = &node["trigger"]["advice"];
        assert_eq!(advice["key"], "dcgm-engine-unreachable", "{version}");
        let fixes: Vec<&str> = advice["fixes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap())
            .collect();
        let cause = advice["cause"].to_string();
        let notes = node["notes"].to_string();
        match (row.client, row.monitors_arm64) {
            // The 2025 builds: upgrade first, no engine accelready runs can serve them.
            (DcgmClient::Dcgm3, _) => {
                assert!(
                    fixes[0].starts_with("Upgrade the EKS node monitoring agent first"),
                    "{version}: {fixes:?}"
                );
                assert!(fixes[0].contains("runs DCGM 4"), "{version}");
            }
            // v1.6.0 - v1.7.1 skip arm64: the error is not theirs, and GPU health is unwatched.
            (DcgmClient::Dcgm4, false) => {
                assert!(cause.contains("skips DCGM on arm64"), "{version}: {cause}");
                assert!(
                    notes.contains("GPU health is not monitored on this node"),
                    "{version}: {notes}"
                );
                assert!(
                    fixes[0].contains("`hostengine` host container"),
                    "{version}"
                );
            }
            // v1.7.2+: arm64 needs an engine: accelready's host engine first.
            (DcgmClient::Dcgm4, true) => {
                assert!(fixes[0].starts_with("Run a DCGM host engine on the node: accelready's `hostengine` host container"), "{version}: {fixes:?}");
                assert!(
                    fixes[1].contains("override dcgmAgent.affinity"),
                    "{version}"
                );
                assert!(!cause.contains("skips DCGM"), "{version}");
                assert!(!notes.contains("GPU health is not monitored"), "{version}");
            }
        }
    }
}

#[test]
fn the_incident_message_says_upgrade_first_for_every_agent_row() {
    use accelready::repair::agent::{DcgmClient, AGENTS};
    for row in AGENTS {
        let version = row.since.to_string();
        let (code, forecast) = json("incident-node.json", &["--agent-version", &version]);
        assert_eq!(code, 3, "{version}");
        let advice = &forecast["nodes"][0]["trigger"]["advice"];
        assert_eq!(advice["key"], "dcgm-library-not-found", "{version}");
        let first = advice["fixes"][0].as_str().unwrap();
        assert!(
            first.starts_with("Upgrade the EKS node monitoring agent first"),
            "{version}: {first}"
        );
        // Named as a DCGM 4 agent, the DCGM-3 message contradicts it, and the cause says so.
        let contradiction = advice["cause"].to_string().contains("the agent given is");
        assert_eq!(contradiction, row.client == DcgmClient::Dcgm4, "{version}");
    }
}

#[test]
fn the_agent_daemonset_gives_the_version_and_address() {
    let cases = [
        (
            "agent-v1.2.0.json",
            "v1.2.0",
            "v1.0.0 – v1.5.x",
            "dcgm-3",
            None,
        ),
        (
            "agent-v1.6.7.json",
            "v1.6.7",
            "v1.6.0 – v1.6.x",
            "dcgm-4",
            None,
        ),
        ("agent-v1.7.0.json", "v1.7.0", "v1.7.0", "dcgm-4", None),
        (
            "agent-v1.7.1-dcgm-address.json",
            "v1.7.1",
            "v1.7.1",
            "dcgm-4",
            Some("localhost:5556"),
        ),
        (
            "agent-v1.7.2.json",
            "v1.7.2",
            "v1.7.2 – v1.7.x",
            "dcgm-4",
            None,
        ),
    ];
    for (file, version, range, client, address) in cases {
        let path = fixture_arg(file);
        let (code, forecast) = json("amd64-no-engine-node.json", &["--agent", &path]);
        assert_eq!(code, 3, "{file}");
        let agent = &forecast["agent"];
        assert_eq!(agent["source"], "daemonset", "{file}");
        assert_eq!(agent["version"], version, "{file}");
        assert_eq!(agent["range"], range, "{file}");
        assert_eq!(agent["model"]["client"], client, "{file}");
        let tag = format!(":{version}-eksbuild.1");
        assert!(agent["image"].as_str().unwrap().ends_with(&tag), "{file}");
        assert_eq!(agent["dcgm_address"].as_str(), address, "{file}");
    }
    let (_, out) = text(
        "amd64-no-engine-node.json",
        &["--agent", &fixture_arg("agent-v1.7.1-dcgm-address.json")],
    );
    assert!(
        out.contains(
            "nv-hostengine at localhost:5556 (DCGM_ADDRESS, set by nodeAgent.dcgmAddress)"
        ),
        "{out}"
    );
    assert!(
        out.contains("EKS node monitoring agent v1.7.1 (image 602401143452.dkr.ecr"),
        "{out}"
    );
}

#[test]
fn the_dcgm_server_daemonset_says_where_the_charts_engine_runs() {
    let agent = fixture_arg("agent-v1.7.2.json");
    let default = fixture_arg("dcgm-server.json");
    // arm64: kept off by the chart's affinity, and by the node's GPU taint.
    let (_, forecast) = json(
        "arm64-no-engine-node.json",
        &["--agent", &agent, "--dcgm-server", &default],
    );
    let node = &forecast["nodes"][0];
    assert_eq!(node["dcgm_server"]["placement"], "excluded");
    assert_eq!(
        node["dcgm_server"]["reasons"],
        serde_json::json!([
            "required node affinity, term 1: kubernetes.io/arch In [amd64] (node: arm64)",
            "taint nvidia.com/gpu=true:NoSchedule is not tolerated (it has no tolerations)"
        ])
    );
    assert!(node["trigger"]["advice"]["cause"]
        .to_string()
        .contains("does not run on this node"));
    // amd64: only the taint keeps it off, and the fix says so.
    let (_, forecast) = json(
        "amd64-no-engine-node.json",
        &["--agent", &agent, "--dcgm-server", &default],
    );
    let node = &forecast["nodes"][0];
    assert_eq!(
        node["dcgm_server"]["reasons"],
        serde_json::json!([
            "taint nvidia.com/gpu=true:NoSchedule is not tolerated (it has no tolerations)"
        ])
    );
    let fixes = node["trigger"]["advice"]["fixes"].clone();
    assert!(
        fixes[0]
            .as_str()
            .unwrap()
            .starts_with("Make the chart's dcgm-server run on the node"),
        "{fixes}"
    );
    assert!(
        fixes[0]
            .as_str()
            .unwrap()
            .contains("Here: taint nvidia.com/gpu=true:NoSchedule"),
        "{fixes}"
    );
    // An override that allows arm64 and tolerates everything: it lands, so the
    // engine is there and the advice says where to look instead.
    let (_, forecast) = json(
        "arm64-no-engine-node.json",
        &[
            "--agent",
            &agent,
            "--dcgm-server",
            &fixture_arg("dcgm-server-arm64.json"),
        ],
    );
    let node = &forecast["nodes"][0];
    assert_eq!(node["dcgm_server"]["placement"], "schedules");
    assert!(node["trigger"]["advice"]["cause"]
        .to_string()
        .contains("does schedule on this node"));
    // A healthy arm64 node under a skipping agent: unwatched, and dcgm-server not there.
    let (code, out) = text(
        "healthy-node.json",
        &[
            "--agent",
            &fixture_arg("agent-v1.6.7.json"),
            "--dcgm-server",
            &default,
        ],
    );
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("gpu health:  NOT monitored"), "{out}");
    assert!(out.contains("the chart's dcgm-server ("), "{out}");
    assert!(out.contains("does not schedule on this node"), "{out}");
}

#[test]
fn bad_agent_input_is_named_and_exits_2() {
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["--agent-version".into(), "v1.8.0".into()], "EKS node monitoring agent v1.8.0 is not modelled; known: v1.0.0 – v1.5.x (2025 closed-source builds), v1.6.0 – v1.6.x"),
        (vec!["--agent-version".into(), "v0.9.0".into()], "is not modelled; known: v1.0.0"),
        (vec!["--agent-version".into(), "latest".into()], "invalid EKS node monitoring agent version 'latest'"),
        (vec!["--agent".into(), fixture_arg("agent-v1.9.0.json")], "agent-v1.9.0.json: EKS node monitoring agent v1.9.0 is not modelled; known:"),
        (vec!["--agent".into(), fixture_arg("agent-latest-tag.json")], "tag 'latest' is not an agent version"),
        (vec!["--agent".into(), fixture_arg("agent-digest-only.json")], "has no tag to read the agent version from"),
        (vec!["--agent".into(), fixture_arg("agent-other-daemonset.json")], "has no eks-node-monitoring-agent container (containers: aws-node (public.ecr.aws/eks/aws-node:v1.19.2))"),
        (vec!["--agent".into(), fixture_arg("agent-wrong-kind.json")], "has kind 'Deployment', expected DaemonSet"),
        (vec!["--agent".into(), fixture_arg("agent-truncated.json")], "agent-truncated.json is not valid JSON"),
        (vec!["--agent".into(), fixture_arg("incident-node.json")], "has kind 'Node', expected DaemonSet"),
        (vec!["--agent".into(), "/nonexistent/agent.json".into()], "cannot read the agent DaemonSet from '/nonexistent/agent.json'"),
        (vec!["--dcgm-server".into(), fixture_arg("agent-truncated.json")], "agent-truncated.json is not valid JSON"),
        (vec!["--dcgm-server".into(), "/nonexistent/ds.json".into()], "cannot read the dcgm-server DaemonSet"),
        (
            vec!["--agent-version".into(), "v1.7.2".into(), "--agent".into(), fixture_arg("agent-v1.7.2.json")],
            "cannot be used with",
        ),
    ];
    for (extra, message) in cases {
        let mut args = vec![
            fixture_arg("incident-node.json"),
            "--now".into(),
            NOW.into(),
        ];
        args.extend(extra.iter().cloned());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let output = diagnose(&args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{extra:?}: {stderr}");
        assert!(stderr.contains(message), "{extra:?}: {stderr}");
        assert!(output.stdout.is_empty(), "{extra:?}");
    }
}

/// `text` output indented as README shows it.
fn indented(out: &str) -> String {
    out.lines()
        .map(|line| {
            if line.is_empty() {
                "\n".to_owned()
            } else {
                format!("    {line}\n")
            }
        })
        .collect()
}

#[test]
fn the_readme_example_is_the_real_output() {
    let (_, out) = text("incident-node.json", &["--karpenter", "v1.4.0"]);
    let first = indented(&out);
    let readme =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("README.md"))
            .unwrap();
    assert!(
        readme.contains(&first),
        "README's worked example is out of date:\n{first}"
    );
    // The second example: the same node after the agent was upgraded to
    // v1.7.2, with the chart's dcgm-server as it is by default.
    let (_, out) = text(
        "arm64-no-engine-node.json",
        &[
            "--karpenter",
            "v1.4.0",
            "--agent",
            "tests/fixtures/diagnose/agent-v1.7.2.json",
            "--dcgm-server",
            "tests/fixtures/diagnose/dcgm-server.json",
        ],
    );
    let upgraded = indented(&out);
    assert!(
        readme.contains(&upgraded),
        "README's second example is out of date:\n{upgraded}"
    );
}
