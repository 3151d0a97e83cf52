//! `accelready boot`: the bootstrap container's entrypoint.
//!
//! Bottlerocket runs it (`mode = "always"`) after the NVIDIA kernel modules are
//! loaded and before kubelet starts. It reads the policy from the container's
//! user-data, checks the host, provisions DCGM when the policy allows it,
//! records the verdict on the node (labels, and a taint if asked) through the
//! Bottlerocket API, writes a report on the host, and exits — always within
//! the policy's deadline, because a bootstrap container that hangs hangs the
//! node's boot (FACTS §3).
//!
//! Only a missing or invalid policy (exit 2) and `on-unready = "fail-boot"`
//! with a node that is not ready (the check's exit code) fail the boot; API
//! and report-file trouble is logged and reported, never fatal.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{json, Value};
use tracing::{info, warn};

use crate::arch::Arch;
use crate::bottlerocket::api::{ApiClient, ApiTimings, NodeSettings};
use crate::bundle::{self, ProvisionReport};
use crate::host::HostRoot;
use crate::plan::{self, from_our_install, Plan, Purpose, Roots};
use crate::policy::{OnUnready, Policy};
use crate::probe::{self, CheckReport, ProbeConfig, Verdict};
use crate::report::{self, error_chain, Exit};

/// The directory Bottlerocket mounts into every bootstrap container: its
/// presence tells the image it runs as a bootstrap container.
pub const CONTAINER_DIR: &str = "/.bottlerocket/bootstrap-containers/current";
/// Where Bottlerocket puts a bootstrap container's decoded user-data.
pub const DEFAULT_USER_DATA: &str = "/.bottlerocket/bootstrap-containers/current/user-data";
/// The report on the host (a host path), and the previous boot's beside it.
pub const DEFAULT_REPORT: &str = "/var/lib/accelready/report.json";
/// The Bottlerocket API transaction our settings go through.
pub const API_TRANSACTION: &str = "accelready";
pub const LABEL_DRIVER: &str = "accelready.io/driver";
pub const LABEL_DCGM: &str = "accelready.io/dcgm";

/// Time kept back from provisioning so that the verdict can still be
/// recorded (API, report) before the deadline.
const RECORD_RESERVE_MAX: Duration = Duration::from_secs(10);

/// Why `boot` cannot start at all (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum BootError {
    #[error("this binary's architecture is not one accelready supports; pass --arch")]
    UnknownArch,
    #[error("cannot start the async runtime")]
    Runtime(#[source] std::io::Error),
}

/// Value of the `accelready.io/driver` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DriverLabel {
    Ready,
    Missing,
}

/// Value of the `accelready.io/dcgm` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DcgmLabel {
    /// DCGM was on the host already.
    Ready,
    /// DCGM is usable from accelready's own install.
    Provisioned,
    Missing,
    Unusable,
}

impl DriverLabel {
    fn of(check: &CheckReport) -> Self {
        if check.driver.is_usable() {
            DriverLabel::Ready
        } else {
            DriverLabel::Missing
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            DriverLabel::Ready => "ready",
            DriverLabel::Missing => "missing",
        }
    }
}

impl DcgmLabel {
    fn of(check: &CheckReport, install_dir: &Path) -> Self {
        if check.dcgm.status.is_present() {
            if from_our_install(check, install_dir) {
                DcgmLabel::Provisioned
            } else {
                DcgmLabel::Ready
            }
        } else if check.dcgm.status == crate::probe::dcgm::DcgmStatus::Missing {
            DcgmLabel::Missing
        } else {
            DcgmLabel::Unusable
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            DcgmLabel::Ready => "ready",
            DcgmLabel::Provisioned => "provisioned",
            DcgmLabel::Missing => "missing",
            DcgmLabel::Unusable => "unusable",
        }
    }
}

/// What happened to provisioning.
#[derive(Debug, Serialize)]
#[serde(rename_all = "kebab-case", tag = "outcome")]
pub enum ProvisionStep {
    /// The host's own DCGM is usable, or provisioning is off.
    NotNeeded {
        reason: String,
    },
    /// Wanted, but impossible (no bundle for this architecture, no driver).
    Skipped {
        reason: String,
    },
    Succeeded {
        report: Box<ProvisionReport>,
    },
    Failed {
        error: String,
    },
}

/// What happened when recording the verdict through the Bottlerocket API.
#[derive(Debug, Serialize)]
#[serde(rename_all = "kebab-case", tag = "outcome")]
pub enum ApiStep {
    Applied { socket: PathBuf, settings: Value },
    Failed { socket: PathBuf, error: String },
}

/// The boot report: printed on stdout and written to the host.
#[derive(Debug, Serialize)]
pub struct BootReport {
    pub accelready_version: &'static str,
    pub arch: Arch,
    /// Whether the node meets the policy (`driver.require`, `dcgm.require`).
    pub ready: bool,
    pub verdict: Verdict,
    pub labels: BTreeMap<String, String>,
    /// The taint applied (`key=value:Effect`), when `on-unready = "taint"`.
    pub taint: Option<String>,
    pub on_unready: OnUnready,
    pub provision: ProvisionStep,
    pub api: ApiStep,
    pub deadline_seconds: f64,
    pub deadline_hit: bool,
    pub elapsed_ms: u64,
    /// The process's exit code (non-zero only for `fail-boot`).
    pub exit_code: u8,
    /// The check before provisioning, when provisioning ran.
    pub initial_check: Option<CheckReport>,
    pub check: CheckReport,
    /// Where this report was written on the host, or why it was not.
    pub report_file: Option<PathBuf>,
    pub report_file_error: Option<String>,
}

impl report::Report for BootReport {
    fn write_text(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        writeln!(
            out,
            "accelready boot: {} ({}), exit {}",
            if self.ready { "ready" } else { "NOT ready" },
            self.verdict.as_str(),
            self.exit_code
        )?;
        for (key, value) in &self.labels {
            writeln!(out, "  label  {key}={value}")?;
        }
        if let Some(taint) = &self.taint {
            writeln!(out, "  taint  {taint}")?;
        }
        Ok(())
    }
}

/// Everything `boot` needs besides the host and the policy.
#[derive(Debug, Clone)]
pub struct BootOptions {
    pub arch: Arch,
    pub api_socket: PathBuf,
    pub api_timings: ApiTimings,
    /// The report's host path.
    pub report: PathBuf,
    pub deadline: Duration,
    /// The root of the image this runs from, on this machine: where a
    /// `source = "image"` bundle is ([`plan::DEFAULT_IMAGE_ROOT`] in the
    /// container).
    pub image_root: PathBuf,
}

/// Runs [`boot`] on a private current-thread runtime, for callers without
/// one of their own (the `boot` command).
pub fn boot_blocking(
    host: &HostRoot,
    policy: &Policy,
    options: &BootOptions,
) -> Result<BootReport, BootError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(BootError::Runtime)?;
    let report = runtime.block_on(boot(host, policy, options));
    // Dropping the runtime would wait for nothing: every task was awaited or
    // bounded. Shut it down without blocking on stray blocking-pool work.
    runtime.shutdown_background();
    Ok(report)
}

impl BootReport {
    /// The exit status this boot earned (see [`BootReport::exit_code`]).
    pub fn exit(&self) -> Exit {
        exit_from_code(self.exit_code)
    }
}

fn exit_from_code(code: u8) -> Exit {
    match code {
        0 => Exit::Ready,
        10 => Exit::DcgmMissing,
        11 => Exit::DcgmUnusable,
        20 => Exit::DriverMissing,
        _ => Exit::Internal,
    }
}

/// The whole boot flow, bounded by `options.deadline`.
pub async fn boot(host: &HostRoot, policy: &Policy, options: &BootOptions) -> BootReport {
    let started = Instant::now();
    let deadline = started + options.deadline;
    let reserve = RECORD_RESERVE_MAX.min(options.deadline / 4);
    let mut deadline_hit = false;

    let mut config = ProbeConfig::new(options.arch);
    config.install_dir = policy.dcgm.install_dir.clone();
    let first = probe::probe(host, &config);

    let roots = Roots {
        host,
        image: &options.image_root,
    };
    let (provision, initial_check, check) = match plan::provision_plan(
        policy,
        options.arch,
        roots,
        &first,
        Purpose::Library,
    ) {
        Plan::NotNeeded(reason) => (ProvisionStep::NotNeeded { reason }, None, first),
        Plan::Impossible(reason) => (ProvisionStep::Skipped { reason }, None, first),
        Plan::Provision(mut request) => {
            let budget = deadline
                .saturating_duration_since(Instant::now())
                .saturating_sub(reserve);
            request.timeouts.overall = budget;
            info!(from = %request.source, sha256 = %request.sha256, budget_s = budget.as_secs_f64(),
                  "DCGM not usable from the host; provisioning the pinned bundle");
            let step = match tokio::time::timeout(budget, bundle::provision_async(host, &request))
                .await
            {
                Ok(Ok(report)) => {
                    info!(cache_hit = report.cache_hit, install = %report.install_path.display(), "DCGM provisioned");
                    ProvisionStep::Succeeded {
                        report: Box::new(report),
                    }
                }
                Ok(Err(e)) => {
                    if matches!(e, bundle::Error::Deadline { .. }) {
                        deadline_hit = true;
                    }
                    warn!(error = %error_chain(&e), "provisioning DCGM failed");
                    ProvisionStep::Failed {
                        error: error_chain(&e),
                    }
                }
                Err(_) => {
                    deadline_hit = true;
                    warn!(
                        budget_s = budget.as_secs_f64(),
                        "provisioning DCGM ran into the boot deadline; recording what is known"
                    );
                    ProvisionStep::Failed {
                        error: format!(
                            "boot deadline: provisioning did not finish within {:.1} s",
                            budget.as_secs_f64()
                        ),
                    }
                }
            };
            let after = probe::probe(host, &config);
            (step, Some(first), after)
        }
    };

    let driver_label = DriverLabel::of(&check);
    let dcgm_label = DcgmLabel::of(&check, &policy.dcgm.install_dir);
    let ready = (driver_label == DriverLabel::Ready || !policy.driver.require)
        && (check.dcgm.status.is_present() || !policy.dcgm.require);
    let labels = BTreeMap::from([
        (LABEL_DRIVER.to_owned(), driver_label.as_str().to_owned()),
        (LABEL_DCGM.to_owned(), dcgm_label.as_str().to_owned()),
    ]);
    let taint = (policy.repair.on_unready == OnUnready::Taint && !ready)
        .then(|| policy.repair.taint.to_string());

    let api_budget = deadline.saturating_duration_since(Instant::now());
    let client = ApiClient::new(&options.api_socket, options.api_timings.clone());
    let (api, api_ran_out) = record_on_node(&client, policy, &labels, !ready, api_budget).await;
    deadline_hit |= api_ran_out;

    let exit_code = if policy.repair.on_unready == OnUnready::FailBoot && !ready {
        check.verdict.exit().code().max(1)
    } else {
        0
    };
    if !ready {
        warn!(verdict = check.verdict.as_str(), on_unready = ?policy.repair.on_unready, exit_code, "node is not ready by the policy");
    }
    let mut report = BootReport {
        accelready_version: env!("CARGO_PKG_VERSION"),
        arch: options.arch,
        ready,
        verdict: check.verdict,
        labels,
        taint,
        on_unready: policy.repair.on_unready,
        provision,
        api,
        deadline_seconds: options.deadline.as_secs_f64(),
        deadline_hit,
        elapsed_ms: started.elapsed().as_millis() as u64,
        exit_code,
        initial_check,
        check,
        report_file: None,
        report_file_error: None,
    };
    match write_report(host, &options.report, &report) {
        Ok(path) => report.report_file = Some(path),
        Err(e) => {
            warn!(path = %options.report.display(), error = %e, "cannot write the boot report on the host");
            report.report_file_error = Some(e.to_string());
        }
    }
    info!(
        ready,
        verdict = report.verdict.as_str(),
        exit_code,
        elapsed_ms = report.elapsed_ms,
        "boot done"
    );
    report
}

/// Labels (and the taint, or its removal) through the API, within `budget`.
/// The flag says whether the budget ran out.
async fn record_on_node(
    client: &ApiClient,
    policy: &Policy,
    labels: &BTreeMap<String, String>,
    taint_wanted: bool,
    budget: Duration,
) -> (ApiStep, bool) {
    let socket = client.socket().to_path_buf();
    let work = async {
        let current = client.node_settings().await?;
        let settings = node_patch(
            &current,
            labels,
            policy.repair.on_unready == OnUnready::Taint,
            taint_wanted,
            &policy.repair.taint.to_string(),
        );
        client.apply(API_TRANSACTION, &settings).await?;
        Ok::<Value, crate::bottlerocket::api::ApiError>(settings)
    };
    match tokio::time::timeout(budget, work).await {
        Ok(Ok(settings)) => {
            info!(socket = %socket.display(), %settings, "verdict recorded on the node");
            (ApiStep::Applied { socket, settings }, false)
        }
        Ok(Err(e)) => {
            warn!(error = %error_chain(&e), "cannot record the verdict through the Bottlerocket API");
            (
                ApiStep::Failed {
                    socket,
                    error: error_chain(&e),
                },
                false,
            )
        }
        Err(_) => {
            warn!(socket = %socket.display(), "the Bottlerocket API did not answer before the boot deadline");
            (
                ApiStep::Failed {
                    socket,
                    error: format!("boot deadline reached after {:.1} s", budget.as_secs_f64()),
                },
                true,
            )
        }
    }
}

/// The settings to PATCH: our two labels, and with the taint policy our taint
/// added to (or, once the node is ready, removed from) whatever the node
/// already has under that key. Other labels and taints are never sent, so
/// they are never changed.
pub fn node_patch(
    current: &NodeSettings,
    labels: &BTreeMap<String, String>,
    taint_policy: bool,
    taint_wanted: bool,
    taint: &str,
) -> Value {
    let mut kubernetes = json!({ "node-labels": labels });
    let (key, entry) = split_taint(taint);
    let existing = current.taints.get(key);
    if taint_policy || existing.is_some_and(|list| list.iter().any(|e| e == entry)) {
        let mut list: Vec<String> = existing.cloned().unwrap_or_default();
        list.retain(|e| e != entry);
        if taint_wanted {
            list.push(entry.to_owned());
        }
        // Send the key only when it changes something.
        if taint_wanted || existing.is_some() {
            kubernetes["node-taints"] = json!({ key: list });
        }
    }
    json!({ "kubernetes": kubernetes })
}

/// `key=value:Effect` -> (`key`, `value:Effect`), Bottlerocket's taint shape.
fn split_taint(taint: &str) -> (&str, &str) {
    match taint.split_once('=') {
        Some((key, rest)) => (key, rest),
        None => match taint.split_once(':') {
            Some((key, _)) => (key, &taint[key.len()..]),
            None => (taint, ""),
        },
    }
}

/// Writes the report atomically on the host; the previous one becomes
/// `<name>.prev.json`. Returns the host path written.
fn write_report(
    host: &HostRoot,
    host_path: &Path,
    report: &BootReport,
) -> std::io::Result<PathBuf> {
    let path = host.join(host_path);
    let dir = crate::fsutil::parent_dir(&path);
    std::fs::create_dir_all(&dir)?;
    let mut json = serde_json::to_vec_pretty(report).map_err(std::io::Error::other)?;
    json.push(b'\n');
    if path.exists() {
        let stem = path.file_stem().unwrap_or_default().to_string_lossy();
        let prev = dir.join(format!("{stem}.prev.json"));
        // Link, then rename over: the previous report is never missing.
        let link = dir.join(format!(".{stem}.prev.{}.tmp", std::process::id()));
        let _ = std::fs::remove_file(&link);
        std::fs::hard_link(&path, &link)?;
        std::fs::rename(&link, &prev)?;
    }
    crate::fsutil::write_atomic(&path, &json)?;
    Ok(host_path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels() -> BTreeMap<String, String> {
        BTreeMap::from([(LABEL_DCGM.to_owned(), "missing".to_owned())])
    }

    fn settings(taints: &[(&str, &[&str])]) -> NodeSettings {
        NodeSettings {
            labels: BTreeMap::new(),
            taints: taints
                .iter()
                .map(|(k, v)| (k.to_string(), v.iter().map(|s| s.to_string()).collect()))
                .collect(),
        }
    }

    const TAINT: &str = "accelready.io/dcgm-unready:NoSchedule";

    #[test]
    fn split_taint_handles_both_forms() {
        assert_eq!(split_taint("a/b:NoSchedule"), ("a/b", ":NoSchedule"));
        assert_eq!(split_taint("a/b=v:NoExecute"), ("a/b", "v:NoExecute"));
    }

    #[test]
    fn label_policy_sends_only_labels() {
        let patch = node_patch(
            &settings(&[("other", &["x:NoSchedule"])]),
            &labels(),
            false,
            true,
            TAINT,
        );
        assert_eq!(
            patch,
            json!({"kubernetes": {"node-labels": {"accelready.io/dcgm": "missing"}}})
        );
    }

    #[test]
    fn taint_is_merged_with_existing_entries_of_the_same_key() {
        let current = settings(&[
            ("accelready.io/dcgm-unready", &["other:NoExecute"]),
            ("team", &["ml:NoSchedule"]),
        ]);
        let patch = node_patch(&current, &labels(), true, true, TAINT);
        assert_eq!(
            patch["kubernetes"]["node-taints"],
            json!({"accelready.io/dcgm-unready": ["other:NoExecute", ":NoSchedule"]})
        );
        // Applying twice does not duplicate it.
        let current = settings(&[("accelready.io/dcgm-unready", &[":NoSchedule"])]);
        let patch = node_patch(&current, &labels(), true, true, TAINT);
        assert_eq!(
            patch["kubernetes"]["node-taints"],
            json!({"accelready.io/dcgm-unready": [":NoSchedule"]})
        );
    }

    #[test]
    fn a_ready_node_loses_our_taint_from_an_earlier_boot_but_keeps_others() {
        let current = settings(&[(
            "accelready.io/dcgm-unready",
            &[":NoSchedule", "x:NoExecute"],
        )]);
        let patch = node_patch(&current, &labels(), true, false, TAINT);
        assert_eq!(
            patch["kubernetes"]["node-taints"],
            json!({"accelready.io/dcgm-unready": ["x:NoExecute"]})
        );
        // Even after switching to the label policy.
        let patch = node_patch(&current, &labels(), false, false, TAINT);
        assert_eq!(
            patch["kubernetes"]["node-taints"],
            json!({"accelready.io/dcgm-unready": ["x:NoExecute"]})
        );
        // Nothing to remove: no taint key sent at all.
        let patch = node_patch(&settings(&[]), &labels(), true, false, TAINT);
        assert!(patch["kubernetes"].get("node-taints").is_none(), "{patch}");
    }

    #[test]
    fn exit_codes_round_trip() {
        for exit in [
            Exit::Ready,
            Exit::DcgmMissing,
            Exit::DcgmUnusable,
            Exit::DriverMissing,
        ] {
            assert_eq!(exit_from_code(exit.code()), exit);
        }
    }
}
