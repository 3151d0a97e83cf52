//! What to install, decided from the policy: the one place that turns
//! `[dcgm]` and a first check of the host into "nothing to do", "impossible
//! here", or a [`ProvisionRequest`] — download or the image's own bundle.
//! `boot` calls it; so does every other caller that may provision (the
//! host-engine container), so that they can never decide differently.

use std::path::{Path, PathBuf};

use crate::arch::Arch;
use crate::bundle::image::IMAGE_BUNDLE_DIR;
use crate::bundle::{Limits, ProvisionRequest, Source, Timeouts};
use crate::host::HostRoot;
use crate::policy::{BundleOrigin, Policy, Provision};
use crate::probe::CheckReport;

/// Where the image accelready runs from has its root: `/` inside the
/// bootstrap and host containers (the image's own filesystem).
pub const DEFAULT_IMAGE_ROOT: &str = "/";

/// The decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// The host's own DCGM is usable, or provisioning is off.
    NotNeeded(String),
    /// Wanted, but impossible here (no bundle for this architecture, no
    /// driver).
    Impossible(String),
    /// Provision this. Its `timeouts.overall` is the default: callers with a
    /// deadline of their own shorten it.
    Provision(Box<ProvisionRequest>),
}

/// Where the plan's paths lead.
#[derive(Debug, Clone, Copy)]
pub struct Roots<'a> {
    /// The host (policy paths such as `dcgm.ca-bundle` are host paths).
    pub host: &'a HostRoot,
    /// The root of the image accelready runs from, on this machine
    /// ([`DEFAULT_IMAGE_ROOT`] in a container; tests point it elsewhere).
    pub image: &'a Path,
}

/// The directory where the image at `image_root` carries its bundle.
pub fn image_bundle_dir(image_root: &Path) -> PathBuf {
    image_root.join(IMAGE_BUNDLE_DIR.trim_start_matches('/'))
}

/// Why DCGM is being provisioned: what the caller needs from the bundle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// `boot`: a usable `libdcgm` on the node.
    Library,
    /// `hostengine`: `bin/nv-hostengine` (and `dcgmi`) under the install
    /// directory, whether or not the host has a DCGM library of its own.
    HostEngine,
}

/// Decides whether to provision: only with `provision = "if-missing"`, a
/// bundle for this architecture and a driver; and then, for
/// [`Purpose::Library`], when DCGM is not usable from the host, or when the
/// usable one is our own install (so that a reboot re-verifies it and
/// re-exposes it, without copying anything).
///
/// `nv-hostengine` and `dcgmi` are kept in `bin/` when `dcgm.with-hostengine`
/// is set *or* `[hostengine]` wants an engine on this architecture
/// ([`Policy::keeps_hostengine`]): the host container runs the engine from
/// the bundle that `boot` installs, so a policy cannot ask for an engine and
/// get a bundle without one.
pub fn provision_plan(
    policy: &Policy,
    arch: Arch,
    roots: Roots<'_>,
    first: &CheckReport,
    purpose: Purpose,
) -> Plan {
    let dcgm = &policy.dcgm;
    if dcgm.provision == Provision::Never {
        return Plan::NotNeeded("dcgm.provision = \"never\"".into());
    }
    let ours = from_our_install(first, &dcgm.install_dir);
    if purpose == Purpose::Library && first.dcgm.status.is_present() && !ours {
        return Plan::NotNeeded("the host's own DCGM is usable".into());
    }
    if !first.driver.is_usable() {
        return Plan::Impossible("the NVIDIA driver is missing; DCGM would not help".into());
    }
    let Some(bundle) = dcgm.bundle_for(arch) else {
        return Plan::Impossible(format!("no [dcgm.bundle.{arch}] in the policy"));
    };
    let source = match bundle.origin() {
        Some(BundleOrigin::Url(url)) => Source::Url {
            url: url.to_owned(),
            allow_insecure_http: dcgm.allow_insecure_http,
            // The policy names a host path (e.g. where settings.pki puts it).
            ca_bundle: dcgm.ca_bundle.as_ref().map(|ca| roots.host.join(ca)),
        },
        Some(BundleOrigin::Image) => Source::Image {
            dir: image_bundle_dir(roots.image),
        },
        None => {
            return Plan::Impossible(format!(
                "[dcgm.bundle.{arch}] has neither a url nor source = \"image\""
            ))
        }
    };
    Plan::Provision(Box::new(ProvisionRequest {
        source,
        sha256: bundle.sha256.as_str().to_owned(),
        arch,
        install_dir: dcgm.install_dir.clone(),
        expose_at: Some(dcgm.expose_at.clone()),
        with_hostengine: policy.keeps_hostengine(arch) || purpose == Purpose::HostEngine,
        limits: Limits::default(),
        timeouts: Timeouts::default(),
    }))
}

/// Whether the DCGM that `check` chose lives in accelready's install dir.
pub fn from_our_install(check: &CheckReport, install_dir: &Path) -> bool {
    check
        .dcgm
        .path
        .as_deref()
        .is_some_and(|path| path.starts_with(install_dir))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::dcgm::{DcgmReport, DcgmStatus};
    use crate::probe::driver::DriverReport;
    use crate::probe::Verdict;

    /// The incident: driver loaded, no DCGM.
    fn incident() -> CheckReport {
        CheckReport {
            verdict: Verdict::DcgmMissing,
            arch: Arch::Aarch64,
            host_root: "/.bottlerocket/rootfs".into(),
            driver: DriverReport {
                loaded: true,
                version: Some("580.159.03".into()),
                devices: 1,
                control_device: true,
                gpus: 1,
                nvml: Some("/usr/lib/nvidia/tesla/libnvidia-ml.so.1".into()),
                problems: Vec::new(),
                warnings: Vec::new(),
            },
            dcgm: DcgmReport {
                status: DcgmStatus::Missing,
                path: None,
                soname: None,
                version: None,
                problems: Vec::new(),
                warnings: Vec::new(),
                candidates: Vec::new(),
                searched: Vec::new(),
            },
        }
    }

    fn plan(policy: &str, first: &CheckReport) -> Plan {
        let policy = Policy::parse(policy).unwrap();
        let host = HostRoot::new("/.bottlerocket/rootfs");
        let roots = Roots {
            host: &host,
            image: Path::new("/"),
        };
        provision_plan(&policy, Arch::Aarch64, roots, first, Purpose::Library)
    }

    const SHA: &str = "3f5a0f8e1c2d4b6a79808f1e2d3c4b5a69788796a5b4c3d2e1f0a9b8c7d6e5f4";

    #[test]
    fn an_image_bundle_becomes_an_image_source_under_the_image_root() {
        let policy = format!(
            "[dcgm]\nprovision = \"if-missing\"\nwith-hostengine = true\n[dcgm.bundle.aarch64]\nsource = \"image\"\nsha256 = \"{SHA}\"\n"
        );
        let Plan::Provision(request) = plan(&policy, &incident()) else {
            panic!("expected a provision plan");
        };
        assert_eq!(
            request.source,
            Source::Image {
                dir: PathBuf::from("/dcgm")
            }
        );
        assert_eq!(request.sha256, SHA);
        assert!(request.with_hostengine);
        assert_eq!(
            request.expose_at.as_deref(),
            Some(Path::new("/mnt/accelready/dcgm"))
        );
    }

    #[test]
    fn a_url_bundle_is_downloaded_with_the_ca_on_the_host() {
        let policy = format!(
            "[dcgm]\nprovision = \"if-missing\"\nca-bundle = \"/etc/pki/mirror.pem\"\n[dcgm.bundle.aarch64]\nurl = \"https://mirror/dcgm.deb\"\nsha256 = \"{SHA}\"\n"
        );
        let Plan::Provision(request) = plan(&policy, &incident()) else {
            panic!("expected a provision plan");
        };
        assert_eq!(
            request.source,
            Source::Url {
                url: "https://mirror/dcgm.deb".into(),
                allow_insecure_http: false,
                ca_bundle: Some("/.bottlerocket/rootfs/etc/pki/mirror.pem".into()),
            }
        );
    }

    #[test]
    fn nothing_to_do_or_impossible() {
        let image = format!(
            "[dcgm]\nprovision = \"if-missing\"\n[dcgm.bundle.x86_64]\nsource = \"image\"\nsha256 = \"{SHA}\"\n"
        );
        assert_eq!(
            plan(&image, &incident()),
            Plan::Impossible("no [dcgm.bundle.aarch64] in the policy".into())
        );
        assert!(matches!(plan("", &incident()), Plan::NotNeeded(_)));
        let mut no_driver = incident();
        no_driver.driver.problems.push("nvidia not loaded".into());
        let aarch64 = image.replace("x86_64", "aarch64");
        assert!(matches!(plan(&aarch64, &no_driver), Plan::Impossible(_)));
        let mut host_dcgm = incident();
        host_dcgm.dcgm.status = DcgmStatus::Present;
        host_dcgm.dcgm.path = Some("/usr/lib64/libdcgm.so.4".into());
        assert!(matches!(plan(&aarch64, &host_dcgm), Plan::NotNeeded(_)));
        // Our own install is re-verified and re-exposed at every boot.
        host_dcgm.dcgm.path = Some("/var/lib/accelready/dcgm/current/lib/libdcgm.so.4".into());
        assert!(matches!(plan(&aarch64, &host_dcgm), Plan::Provision(_)));
    }

    #[test]
    fn the_engine_is_kept_where_it_is_wanted_and_provisioned_for_the_host_container() {
        let policy = |extra: &str| {
            Policy::parse(&format!(
                "[dcgm]\nprovision = \"if-missing\"\n[dcgm.bundle.aarch64]\nsource = \"image\"\nsha256 = \"{SHA}\"\n{extra}"
            ))
            .unwrap()
        };
        let host = HostRoot::new("/.bottlerocket/rootfs");
        let roots = Roots {
            host: &host,
            image: Path::new("/"),
        };
        let request = |policy: &Policy, first: &CheckReport, purpose| match provision_plan(
            policy,
            Arch::Aarch64,
            roots,
            first,
            purpose,
        ) {
            Plan::Provision(request) => Some(request.with_hostengine),
            _ => None,
        };
        // [hostengine] wants an engine on aarch64 by default: kept, although
        // dcgm.with-hostengine is false.
        let default = policy("");
        assert_eq!(request(&default, &incident(), Purpose::Library), Some(true));
        let never = policy("[hostengine]\nrun = \"never\"\n");
        assert_eq!(request(&never, &incident(), Purpose::Library), Some(false));
        // The host container provisions even where the host has a DCGM
        // library of its own (it needs nv-hostengine, which that may lack).
        let mut host_dcgm = incident();
        host_dcgm.dcgm.status = DcgmStatus::Present;
        host_dcgm.dcgm.path = Some("/usr/lib64/libdcgm.so.4".into());
        assert_eq!(request(&default, &host_dcgm, Purpose::Library), None);
        assert_eq!(request(&never, &host_dcgm, Purpose::HostEngine), Some(true));
    }
}
